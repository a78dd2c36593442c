"""Graph surgery: passes, their registry and the runner that checks them."""
