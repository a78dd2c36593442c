"""Calibration and validation data: readers for image folders, array files and functions."""
