"""Decode a JSON request body. Every way it can fail is one BadJsonBody, answered as a 400.

`json.loads` raises more than JSONDecodeError on hostile input: a ValueError for an integer past
the interpreter's digit limit (sys.get_int_max_str_digits) and a RecursionError for nesting
deeper than the recursion limit. Both used to escape the views as 500s.
"""

from __future__ import annotations

import json
import sys
from typing import Any


class BadJsonBody(ValueError):
    """The body is not JSON we can read; str() is a message for the client."""


def json_body_loads(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadJsonBody("request body is not valid UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadJsonBody(f"request body is not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise BadJsonBody("request body is nested too deeply") from None
    except ValueError:
        # Only int() of a too-long digit string raises a plain ValueError inside json.loads.
        limit = sys.get_int_max_str_digits()
        raise BadJsonBody(f"request body has a number longer than {limit} digits") from None
