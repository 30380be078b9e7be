"""Analysis: the theory (expected tau and speedup), calibration of confidences, the Algorithm 1
step-through, automatic alpha."""
