// Loaded into a process (LD_PRELOAD, LD_AUDIT), appends "<pid> <executable>" to the file named
// by $KGPU_PRELOAD_MARKER: proof that the environment reached that process's dynamic loader.
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void kgpu_preload_probe(void) {
    const char* marker = getenv("KGPU_PRELOAD_MARKER");
    if (marker == NULL || marker[0] == '\0') return;
    char exe[PATH_MAX] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = '\0';
    char line[PATH_MAX + 32];
    int len = snprintf(line, sizeof line, "%d %s\n", (int)getpid(), exe);
    int fd = open(marker, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (len > 0) (void)!write(fd, line, (size_t)len);
    close(fd);
}

// LD_AUDIT loads a library only if it answers la_version.
unsigned int la_version(unsigned int version) { return version; }
