"""A small Python client for Undoable's agent API. Standard library only; imports no Django.

from webapp.agents.client import Client
client = Client("http://127.0.0.1:8000", "udb_...")
client.exec("print(1+1)").stdout            # "2\\n"
with client.session() as s:
    s.exec("x = 21")
    s.exec("x * 2").stdout                  # "42\\n"
    s.write_file("data.csv", b"a,b\\n1,2\\n")
    s.read_file("data.csv")
"""

from webapp.agents.client.client import ApiError, Client, ExecResult, Session

__all__ = ["ApiError", "Client", "ExecResult", "Session"]
