"""What a command says of itself (help.py): --help, a bare command's first line, a quiet end on a closed pipe."""
