"""The example from python-sdk.md / seed 001, as written, with only the import renamed.

Not a test module itself: ``test_sdk_seed_example`` imports it, and ``keepstate worker
sdk_seed_chat:worker`` runs it in a subprocess. The URL and key here are overridden by the test
(``worker.configure``) or by the command's flags.
"""

# ruff: noqa
# mypy: disable-error-code="no-untyped-def"
import keepstate

WORKER_KEY = None

worker = keepstate.Worker("http://127.0.0.1:8420", key=WORKER_KEY)  # AsyncWorker for async agents


@worker.agent("chat")
def chat(inv: keepstate.Invocation):
    message = inv.input["message"]
    history = inv.state.session.append("history", [{"role": "user", "content": message}])
    reply = f"turn {(history.length + 1) // 2}: you said {message!r}"
    inv.state.session.append("history", [{"role": "assistant", "content": reply}])
    visits = inv.state.agent.update("visits", lambda n: n + 1, default=0)
    return {"reply": reply, "visits": visits}
