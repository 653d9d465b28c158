"""The ASGI entry point as a server process starts it."""

from tests.webapp.fresh_interpreter import probe_state


def test_the_server_starts_with_every_view_loaded_and_kept_out_of_full_collections(tmp_path):
    probe = (
        "import gc, json, sys\n"
        "import webapp.asgi\n"
        "state = {'frozen': gc.get_freeze_count(), 'unfrozen': len(gc.get_objects())}\n"
        "state.update(urls='webapp.urls' in sys.modules, llm='openai' in sys.modules)\n"
        "print(json.dumps(state))\n"
    )
    state = probe_state(probe, tmp_path)
    # The views and what they import (the LLM client among them) were loaded before the
    # freeze, so a full collection no longer walks them.
    assert state["urls"] and state["llm"]
    assert state["frozen"] > 10 * state["unfrozen"]
