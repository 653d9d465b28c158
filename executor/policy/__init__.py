"""The bwrap sandbox policy: command line, rlimits, seccomp filter and in-sandbox driver."""
