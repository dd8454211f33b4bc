"""A real lab reached over SSH: its file format and Ansible inventory, preflight, the site and placement, clean."""
