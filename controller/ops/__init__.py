"""What operators do by hand with kubectl and the AWS console: cluster status, draining and cordoning nodes, and
rehearsing a spot interruption; plus the output helpers every command shares (tables that fit the terminal, machine
output with apiVersion/kind, progress on a TTY)."""
