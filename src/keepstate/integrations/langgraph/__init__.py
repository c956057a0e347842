"""keepstate as LangGraph's checkpointer (KeepstateSaver) and store (KeepstateStore)."""
