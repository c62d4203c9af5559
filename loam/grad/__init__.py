"""Gradients: the grad clauses of the kernel ops (vector-Jacobian products written as kernel ops)."""
