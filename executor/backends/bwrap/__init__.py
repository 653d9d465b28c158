"""The bubblewrap backend: runs forked from a zygote, else warm sandboxes, else a cold one."""
