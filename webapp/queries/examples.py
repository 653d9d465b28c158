"""Example prompts on the home page: one per kind, each safe to try."""

EXAMPLE_PROMPTS: list[tuple[str, str]] = [
    ("python", "Print the first 20 prime numbers, one per line, with a progress bar."),
    ("python", "Count down from 5 to 1, one number per second, then print 'liftoff'."),
    ("fs", "Write a file joke.txt with a programming joke in it."),
    ("db", "Add 500 to every balance in the users table."),
    ("rest", "Send a joke to Ana on Slack."),
]
