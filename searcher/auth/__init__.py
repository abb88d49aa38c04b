"""API keys and their limits: keys stored hashed in the state store, rates and quotas."""
