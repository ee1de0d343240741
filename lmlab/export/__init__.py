"""Export to (and import from) other formats; today Hugging Face transformers."""

from lmlab.lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, dict.fromkeys(
    ("config_from_hf", "family_of", "from_hf_state_dict", "hf_config", "hf_config_dict",
     "to_hf_state_dict"), "lmlab.export.hf"))

__all__ = ["config_from_hf", "family_of", "from_hf_state_dict", "hf_config", "hf_config_dict",
           "to_hf_state_dict"]
