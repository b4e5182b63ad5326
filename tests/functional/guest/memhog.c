/* Licensed under the Apache License, Version 2.0 (the "License"); you may
 * not use this file except in compliance with the License. You may obtain
 * a copy of the License at
 *
 *      http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 * WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 * License for the specific language governing permissions and limitations
 * under the License.
 *
 * memhog: a workload for the test guest whose need for memory changes
 * over time. It allocates anonymous memory in steps of STEP_MB every
 * INTERVAL_MS milliseconds and writes to every page of each step, until
 * it holds PEAK_MB; it then keeps touching what it holds (so the pages
 * stay in use) until the file FREE_FILE exists, unmaps everything and
 * exits. Each step is reported on the console ("COMPOSABLE-GUEST memhog
 * holds N MiB"), as the guest's other lines are.
 *
 *   memhog STEP_MB INTERVAL_MS PEAK_MB FREE_FILE
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_STEPS 4096
#define PAGE 4096

static void say(const char *fmt, long value)
{
    char line[128];
    int fd = open("/dev/console", O_WRONLY | O_NOCTTY);
    int n = snprintf(line, sizeof(line), fmt, value);
    if (fd >= 0) {
        if (write(fd, line, n) < 0) {
            /* nothing to do: the console is only a report */
        }
        close(fd);
    }
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void touch(char *p, size_t len, unsigned char seed)
{
    for (size_t off = 0; off < len; off += PAGE)
        p[off] = (char)(seed + off / PAGE);
}

int main(int argc, char **argv)
{
    static char *steps[MAX_STEPS];
    long step_mb, interval_ms, peak_mb, held = 0;
    int n = 0, round = 0;

    if (argc != 5) {
        fprintf(stderr, "usage: memhog STEP_MB INTERVAL_MS PEAK_MB "
                        "FREE_FILE\n");
        return 2;
    }
    step_mb = atol(argv[1]);
    interval_ms = atol(argv[2]);
    peak_mb = atol(argv[3]);
    if (step_mb <= 0 || interval_ms < 0 || peak_mb < step_mb) {
        fprintf(stderr, "memhog: bad arguments\n");
        return 2;
    }
    say("COMPOSABLE-GUEST memhog started pid=%ld\n", (long)getpid());
    while (held < peak_mb && n < MAX_STEPS) {
        size_t len = (size_t)step_mb << 20;
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            say("COMPOSABLE-GUEST memhog mmap-failed at %ld MiB\n", held);
            return 1;
        }
        touch(p, len, (unsigned char)n);
        steps[n++] = p;
        held += step_mb;
        say("COMPOSABLE-GUEST memhog holds %ld MiB\n", held);
        pause_ms(interval_ms);
    }
    say("COMPOSABLE-GUEST memhog peak %ld MiB\n", held);
    while (access(argv[4], F_OK) != 0) {
        /* Keep the working set in use: a page at a time, one step per
         * round, so the guest keeps swapping as a busy workload would. */
        touch(steps[round % n], (size_t)step_mb << 20,
              (unsigned char)round);
        round++;
        pause_ms(interval_ms > 0 ? interval_ms : 100);
    }
    for (int i = 0; i < n; i++)
        munmap(steps[i], (size_t)step_mb << 20);
    say("COMPOSABLE-GUEST memhog freed %ld MiB\n", held);
    return 0;
}
