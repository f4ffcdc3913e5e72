"""The simulation core: engine, network and storage, nodes, failure processes, random streams."""
