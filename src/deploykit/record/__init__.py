"""The run record: every stage's status and verdict, collected from the store, checked."""
