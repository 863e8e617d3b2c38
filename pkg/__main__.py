from qtts.cli.app import main

main()
