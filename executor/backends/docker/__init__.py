"""The Docker backend: warm containers (pool.py) whose supervisor (driver.py) runs the program."""
