"""Export to (and import from) other formats; today Hugging Face transformers."""

from lmlab.export.hf import (
    config_from_hf,
    family_of,
    from_hf_state_dict,
    hf_config,
    hf_config_dict,
    to_hf_state_dict,
)

__all__ = ["config_from_hf", "family_of", "from_hf_state_dict", "hf_config", "hf_config_dict",
           "to_hf_state_dict"]
