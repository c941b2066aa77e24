"""The third study's loop (issue 34): Acrobot-v1 / CartPole-v1 in PyTorch, batched over runs, a DQN-style Q and
a behaviour policy π distilled towards softmax(Q/τ) with λ read from the ISV that the controller kernel writes.

Needs PyTorch (the ``deep`` dependency group); nothing outside this package imports it at module level.
"""
