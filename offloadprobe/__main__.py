from offloadprobe.cli import main

main()
