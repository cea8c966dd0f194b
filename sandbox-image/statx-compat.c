/* statx(2) for programs that ask for AT_NO_AUTOMOUNT, on kernels that refuse it.
 *
 * gVisor's kernel before 2023 (Debian 12's runsc is 2022-12-19) returns
 * EINVAL for statx's AT_NO_AUTOMOUNT flag, and coreutils passes it on every
 * call: under that runtime `ls -l`, `stat`, `cp` and `mv` all fail with
 * "Invalid argument". The image preloads this (/etc/ld.so.preload) so a
 * refused call is made once more without the flag, which only matters for
 * automount points, and a sandbox has none. Under any other kernel the first
 * call succeeds and nothing else happens.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
    long done = syscall(SYS_statx, dirfd, path, flags, mask, buf);
    if (done == -1 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT))
        done = syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
    return (int)done;
}
