"""The executor daemon's inside: the claim loop (`loop`), one command's life
(`command`), its output streamed into the database (`output_writer`), its
final status (`outcome`) and the image new commands start on (`promotion`)."""
