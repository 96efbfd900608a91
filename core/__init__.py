"""What every layer of loopnest may use: settings, counters, hardware descriptions, search spaces,
timings and atomic files. Imports no torch, triton or optuna."""
