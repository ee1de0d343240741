"""Commands whose work or output spans several layers (training, then inference on its
result): they live here, above every package they combine, never inside train/."""
