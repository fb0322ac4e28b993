"""Tools for developers and tests, never shipped in the wheel or the image: throwaway servers.

``binlake demo`` (from a checkout), the benchmarks and the test bed start their MariaDB/MySQL
servers through :mod:`devtools.sandbox`.
"""
