# The package's version: the same as project(weave VERSION ...) in CMakeLists.txt (test_capi.py checks).
# A libweave of another major.minor is refused at load (before 1.0 each minor version may change the ABI).
__version__ = "0.4.0"
