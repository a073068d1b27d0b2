"""studykit: a notebook study kit on the utility of gradient compression."""
__version__ = "0.1.0"
