"""The length rules that serving engines ship, as policies of this project.

One module per engine, each citing its source (file, PR) and saying what it simplified; e.g.
`vllm.py`: vLLM's adaptive verification with its global draft budget, its batch-size schedule and
its online acceptance calibration. The package sits in the layer of the round's parts
(tests/test_imports.py), beside policy.py: it imports the core below it, never the engine.
"""
