/*
 * undoable-launch: the host-side first step of every bwrap sandbox
 * (executor/policy/bwrap_args.py builds its command line).
 *
 *   undoable-launch [--cgroup-procs FILE]... [--uid UID] [--kill-after SECONDS] -- PROGRAM [ARG]...
 *
 * In this order, in one small process:
 *   1. write itself into each FILE (a sandbox cgroup's cgroup.procs), so that nothing the
 *      sandbox starts can escape its cgroups;
 *   2. with --uid, drop to UID (gid too): no supplementary groups, no capabilities of any kind;
 *   3. with --kill-after, run PROGRAM as a child and SIGKILL it once SECONDS have passed,
 *      even if the server that started it is wedged; without it, become PROGRAM.
 *
 * These were three dynamically linked execs before (sh, setpriv, timeout): about 3 ms of
 * CPU for every single-use sandbox on a 2-core host, a tenth of a whole stateless run.
 *
 * Exit status: PROGRAM's, or 128+N if signal N ended it; 137 after the kill-after deadline;
 * 125 if a step before PROGRAM failed (nothing was run); 126/127 if PROGRAM could not be run.
 * The arguments come from our own code, never from a user; they are still checked strictly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { FAILED = 125, CANNOT_EXECUTE = 126, NOT_FOUND = 127, KILLED_AT_DEADLINE = 128 + 9 };
enum { MAX_CGROUPS = 16 };

static void fail(const char *what)
{
    fprintf(stderr, "undoable-launch: %s: %s\n", what, strerror(errno));
    exit(FAILED);
}

static void refuse(const char *why, const char *detail)
{
    fprintf(stderr, "undoable-launch: %s%s%s\n", why, detail ? ": " : "", detail ? detail : "");
    exit(FAILED);
}

static long parse_count(const char *text, long max)
{
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno || end == text || *end || value < 0 || value > max)
        refuse("not a number in range", text);
    return value;
}

static void join_cgroup(const char *procs)
{
    int fd = open(procs, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        fail(procs);
    if (write(fd, "0", 1) != 1)
        fail(procs);
    if (close(fd) != 0)
        fail(procs);
}

static void drop_to(uid_t uid)
{
    if (setgroups(0, NULL) != 0)
        fail("setgroups");
    if (setresgid(uid, uid, uid) != 0)
        fail("setresgid");
    if (setresuid(uid, uid, uid) != 0)
        fail("setresuid");
    /* Leaving uid 0 cleared the permitted, effective and ambient sets; the inheritable set
     * survives it, and would hand capabilities to any program carrying file capabilities. */
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &header, caps) != 0)
        fail("capget");
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
        caps[i].inheritable = 0;
    if (syscall(SYS_capset, &header, caps) != 0)
        fail("capset");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        fail("clearing ambient capabilities");
    uid_t real, effective, saved;
    if (getresuid(&real, &effective, &saved) != 0 || real != uid || effective != uid || saved != uid)
        refuse("the uid did not change", NULL);
    if (setresuid(0, 0, 0) == 0)
        refuse("could regain root after dropping it", NULL);
}

static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return FAILED;
}

static void exec_program(char **program)
{
    execvp(program[0], program);
    int code = errno == ENOENT ? NOT_FOUND : CANNOT_EXECUTE;
    fprintf(stderr, "undoable-launch: %s: %s\n", program[0], strerror(errno));
    _exit(code);
}

static int wait_for(pid_t child)
{
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR)
            fail("waitpid");
    return status;
}

static struct timespec time_left(const struct timespec *deadline)
{
    struct timespec now, left;
    clock_gettime(CLOCK_MONOTONIC, &now);
    left.tv_sec = deadline->tv_sec - now.tv_sec;
    left.tv_nsec = deadline->tv_nsec - now.tv_nsec;
    if (left.tv_nsec < 0) {
        left.tv_sec -= 1;
        left.tv_nsec += 1000000000L;
    }
    return left;
}

/* Like `timeout -s KILL`: the termination signals we get are passed on to the child. */
static int run_until(char **program, long seconds)
{
    const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT };
    sigset_t waited, previous;
    sigemptyset(&waited);
    sigaddset(&waited, SIGCHLD);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaddset(&waited, forwarded[i]);
    /* Blocked signals are queued rather than ignored, so sigtimedwait sees every one. */
    signal(SIGCHLD, SIG_DFL);
    if (sigprocmask(SIG_BLOCK, &waited, &previous) != 0)
        fail("sigprocmask");

    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += seconds;
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        sigprocmask(SIG_SETMASK, &previous, NULL);
        exec_program(program);
    }
    for (;;) {
        int status;
        pid_t done = waitpid(child, &status, WNOHANG);
        if (done == child)
            return exit_code(status);
        if (done < 0 && errno != EINTR)
            fail("waitpid");
        struct timespec left = time_left(&deadline);
        if (left.tv_sec < 0) {
            kill(child, SIGKILL);
            wait_for(child);
            return KILLED_AT_DEADLINE;
        }
        int sig = sigtimedwait(&waited, NULL, &left);
        if (sig > 0 && sig != SIGCHLD)
            kill(child, sig);
    }
}

int main(int argc, char **argv)
{
    const char *cgroup_procs[MAX_CGROUPS];
    int cgroups = 0;
    long uid = -1, kill_after = -1;
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (i + 1 >= argc)
            refuse("expected an option and its value, or --", argv[i]);
        if (strcmp(argv[i], "--cgroup-procs") == 0) {
            if (cgroups == MAX_CGROUPS)
                refuse("too many cgroups", NULL);
            cgroup_procs[cgroups++] = argv[++i];
        } else if (strcmp(argv[i], "--uid") == 0 && uid < 0) {
            uid = parse_count(argv[++i], 0x7fffffffL);
            if (uid == 0)
                refuse("refusing to run sandboxes as root", NULL);
        } else if (strcmp(argv[i], "--kill-after") == 0 && kill_after < 0) {
            kill_after = parse_count(argv[++i], 7L * 24 * 3600);
        } else {
            refuse("unknown or repeated option", argv[i]);
        }
    }
    if (i + 1 >= argc)
        refuse("usage: undoable-launch [--cgroup-procs FILE]... [--uid UID] "
               "[--kill-after SECONDS] -- PROGRAM [ARG]...", NULL);
    char **program = &argv[i + 1];

    for (int c = 0; c < cgroups; c++)
        join_cgroup(cgroup_procs[c]);
    if (uid >= 0)
        drop_to((uid_t)uid);
    if (kill_after < 0)
        exec_program(program);
    return run_until(program, kill_after);
}
