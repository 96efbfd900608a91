"""The user-facing DSL that builds loopnest IR."""
