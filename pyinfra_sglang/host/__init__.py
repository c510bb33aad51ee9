"""Host-side decisions, pure (they read no host): the driver's apt plan and where a driver
came from, the platform, Secure Boot, PCIe and P2P, Fabric Manager, the multi-node firewall,
the flash-attn build plan, the Python stack's install order, the model's Hub snapshot."""
