# Compiles one Java program against nexusgrad.jar and runs it (ctest -L java).
# cmake -DJAVAC= -DJAVA= -DJAR= -DLIBDIR= -DSOURCE= -DWORK= -P run_java.cmake
get_filename_component(main "${SOURCE}" NAME_WE)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${JAVAC}" -cp "${JAR}" -d "${WORK}" "${SOURCE}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javac ${SOURCE} failed (${rc})")
endif()
execute_process(COMMAND "${JAVA}" -Xcheck:jni -Djava.library.path=${LIBDIR} -cp "${JAR}:${WORK}" ${main}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${main} failed (${rc})")
endif()
