"""Using a trained run (lmlab.runs.Run): fill masks, generate and embed."""
