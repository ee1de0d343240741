"""Export to (and import from) other formats; today Hugging Face transformers."""

from lmlab.export.hf import family_of, from_hf_state_dict, hf_config, to_hf_state_dict

__all__ = ["family_of", "from_hf_state_dict", "hf_config", "to_hf_state_dict"]
