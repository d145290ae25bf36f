"""Ray AIR documentation-style programs, written for airflowless, that run with only the import lines changed.

Each module keeps its imports at the top, with the Ray line it replaces in a
comment; the program below them is what a Ray AIR user would write.
"""
