"""Fast paths behind the model's signatures, each held equal to the plain computation by a
test: attention (SDPA, plain products on CPU, FlexAttention), linear layers (oneDNN, a cached
transposed weight), the fused projection + cross-entropy; and the machine's tuning (CPU
facts, malloc, threads). Nothing here knows the model."""
