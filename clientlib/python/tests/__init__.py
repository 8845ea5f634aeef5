"""Tests of the Python client: unit tests of its pure parts, and scenarios
against real agents built from this tree (harness.py). Run them with
`make test-python`, or from clientlib/python:

    /usr/bin/python3 -m unittest discover -s tests -t .
"""
