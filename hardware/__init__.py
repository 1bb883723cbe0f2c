"""What a command runs on (devices.py): the device, the CPU threads, the precision and its autocast."""
