"""Using a trained run (lmlab.runs.Run): fill masks, generate, embed, and predict with a
fine-tuned one (through its task's classes in lmlab.finetune, never its trainer)."""
