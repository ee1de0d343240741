"""What the student learns from its teacher: soft labels at a temperature (Hinton et al. 2015),
or, for a number, the teacher's number."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def soft_label_loss(student: Tensor, teacher: Tensor, temperature: float) -> Tensor:
    """Σ over rows of T² · KL(softmax(teacher / T) ‖ softmax(student / T)), for (N, C) logits.
    The T² keeps the gradient's scale the same at any temperature (Hinton et al. 2015)."""
    log_student = F.log_softmax(student.float() / temperature, dim=-1)
    teacher_probs = F.softmax(teacher.float() / temperature, dim=-1)
    return temperature ** 2 * F.kl_div(log_student, teacher_probs, reduction="sum")


def number_loss(student: Tensor, teacher: Tensor) -> Tensor:
    """Σ of squared differences from the teacher's numbers, (N, 1) or (N,) each."""
    return F.mse_loss(student.float().reshape(-1), teacher.float().reshape(-1), reduction="sum")
