from pyagentrl.cli import main

main()
