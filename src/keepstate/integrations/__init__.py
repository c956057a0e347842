"""keepstate inside the agent frameworks: one module per framework, each behind its extra."""
