"""The raytune controller: pure core (config, manifests, runs, decisions) and thin cloud adapters."""
