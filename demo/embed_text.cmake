# Writes the bytes of IN as a NUL-terminated C array `proc_demo_config` to OUT.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "/* generated from ${IN} */\nextern const char proc_demo_config[];\nconst char proc_demo_config[] = {${bytes}0x00};\n")
