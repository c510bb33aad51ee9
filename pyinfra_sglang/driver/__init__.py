"""The NVIDIA driver's side of a host, decided without reading one: the apt plan and package
names (nvidia.py, driver_plan.py), where a running driver came from (host_driver.py), the
platform, Secure Boot, Fabric Manager and NVLink, and a mirror's login."""
