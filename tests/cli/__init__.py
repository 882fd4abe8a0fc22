"""Tests of the command line: run, lab and serve as users run them."""
