"""Framework integrations of attn: thin layers over the one Python API.

- attn.integrations.transformers: registers "attn" as a HuggingFace
  transformers attention implementation (attn.integrations.transformers.register()).
"""
