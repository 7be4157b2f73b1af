"""Garbage collection of instances without NodeClaims and NodeClaims without instances."""
