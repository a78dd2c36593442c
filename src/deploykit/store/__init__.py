"""The artifact store: content-addressed objects, their manifests, digests, temporaries and clock."""
