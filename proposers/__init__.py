"""Proposers: what writes the next candidate harnesses (installed as ``metaharness.proposers``)."""
