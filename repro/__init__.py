"""Running the controller kernels: contract, sources, backends, ISV, scenarios, runners."""
