"""The test stand-in's insides: command line (args), canned answers (chat), HTTP (server)."""
