# Writes the bytes of IN as a NUL-terminated C array `demo_config_text` to OUT.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "/* generated from ${IN} */\nextern const char demo_config_text[];\nconst char demo_config_text[] = {${bytes}0x00};\n")
