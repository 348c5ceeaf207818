"""Built-in reporters, one module each (see ``report.reporters``)."""
